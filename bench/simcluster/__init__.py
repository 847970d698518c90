"""`distbench simcluster`: any distbench command on a simulated cluster of N nodes on this machine
(network namespaces joined by rate-limited veth links; docs/simcluster.md)."""
