"""Pipeline arithmetic (pure, no ranks): textbook bubble forms, the calibrated replay of a
schedule's own action order, and the per-rank compute / exposed-comm / idle breakdown."""
