"""The pure decisions: the engine, the kinds, the rules and plumbing, policies, adoption, and the
ports (what the core and admission ask of the cluster). No I/O; imports only model/."""
