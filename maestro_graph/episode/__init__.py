"""One episode: the LangGraph StateGraph (`graph.build_graph`: intake, router, skill nodes, answer; its state in
`state`, its run context in `context`) and running it over tasks (`runner`).

One job to a module, as LangGraph's templates lay out `state.py`, `context.py` and `graph.py` side by side:

- the graph: `graph` (`build_graph`, the one factory, binds the parts to the nodes and wires them), `state` (the
  schema, the JSON records of steps and decisions, the `SkillCall` a skill node is sent, the node names), `context`
  (the run context), `parts` (`GraphParts`, what every node is handed);
- the nodes, module-level functions of (state, runtime) given the parts, each callable alone in a test: `intake`,
  `router`, `skill_node`, `answer`; `endings` (the state updates that end an episode);
- what intake reads: `conversation` (the conversation rule), `followups` (a follow-up about earlier answers),
  `written_question` (whether a text is a question, or a written calculation); `image_refs` (a thread's images
  kept once in the store);
- what a client writes, checked: `run_input` (a run's input, before LangGraph takes it), `past_intake` (what a
  `Command` or state update writes past intake), `written_state` (what a node reads, typed);
- `confidence` (what an answer's confidence rests on), `storage` (a thread on one machine: SQLite checkpoints and
  the image store), `runner` (episodes over task files).

The data path is one record: every episode writes an `EpisodeResult` (`runner`; a prediction-file line) holding
each decision the router made (`types.Decision`, with its log-probability and the acting policy's entropy) and each
step's typed outcome (`types.Step`). Prediction files, `maestro export`, the GRPO trainer and the TRL rollout
function all read that record; none re-runs or re-derives a step. The reward is `rl.rewards.Rewards`, defined once.
"""
