"""Shipped scheduling plugins, registered through the ``kai.plugins`` entry-point group."""
