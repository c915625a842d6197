"""Controllers beside the scheduler: the podgrouper loop, PodGroup status and Queue status."""
