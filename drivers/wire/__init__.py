"""The wire that every bus server shares: byte ports and wire-time pacing, the server thread, reply faults."""
