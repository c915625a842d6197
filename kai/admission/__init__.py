"""The admission component: webhooks for pods."""
