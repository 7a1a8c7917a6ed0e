"""SessionDB by concern: one mixin per area of the API, composed in ``hermes_store.store``."""
