"""ZeroErr eRob drives on the wire: the shared drives and their firmware thread, the Etherban server, and the host links
that drive a real eRob."""
