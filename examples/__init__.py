"""Example code referenced by the projects in ``projects/``; each module also runs alone."""
