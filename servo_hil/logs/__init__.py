"""Side-by-side MCAP logs of a running rig (`mcap`) and bam's JSON log format (`bam`)."""
