"""What experts and LM routers both build on (model loaders, HTTP clients, package checks): below both, so neither
reaches into the other."""
