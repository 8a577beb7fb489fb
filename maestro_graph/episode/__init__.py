"""One episode: the LangGraph StateGraph (`graph.build_graph`: intake, router, skill nodes, answer; its state in
`state`, its run context in `context`) and running it over tasks (`runner`)."""
