"""What is done with logical plans before an engine runs them: the rewrites, the
global (multi-query) plan and its split into the fused stateless program and the
stateful queries' shapes, the heartbeats a plan needs, and ``roses explain``.
"""
