"""The binder component: BindRequests become Bindings; GPU-sharing ConfigMaps and reservation pods."""
