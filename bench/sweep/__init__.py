"""What the two message-size-sweep kinds share (collectives, allreduce): the exact values they send
and check (values), how their rows are read (reading), memory arithmetic (memory). A kind never
imports another kind: what both need lives here."""
