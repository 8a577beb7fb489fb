"""Images: loading them with errors that name the problem, and where an untrusted request's images may come from."""
