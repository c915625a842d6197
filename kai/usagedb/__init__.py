"""Where historical queue usage comes from, for time-based fair share: the sources and their I/O."""
