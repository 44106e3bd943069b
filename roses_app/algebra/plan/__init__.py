"""The logical plan: its nodes (one per operator of the ROSES algebra) and the values
in them (window specifications, report policies, XQuery modules).

Plans describe, never execute.  Nothing here imports another part of the algebra:
the rules of time, the planner and the reference engine all read plans.
"""
