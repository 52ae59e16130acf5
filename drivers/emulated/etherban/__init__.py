"""An emulated Etherban server (Rhoban's ZeroMQ front of an EtherCAT master, as bam's eRob client talks to it) and
its protobuf messages."""
