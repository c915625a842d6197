"""The scheduler component: the watch cache, its snapshot per cycle, the cycle loop and the commit of decisions."""
