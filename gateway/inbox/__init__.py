"""The interrupt inbox: open interrupts of every agent, served and answerable."""
