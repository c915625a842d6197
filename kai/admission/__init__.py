"""The admission component: KAI's webhooks for pods, Queues, PodGroups and Topologies."""
