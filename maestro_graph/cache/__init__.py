"""The expert-call cache: a local folder or a Redis server every worker shares."""
