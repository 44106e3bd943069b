"""The rules of time, the arithmetic both engines share: which time an item has,
window bounds and contents, lateness, what is released when, and the operators over
publication time that run arrival after arrival.

Pure Python over plan nodes; it imports the plan and nothing else of the algebra.
(A module here may still ``import time``: imports are absolute, so that is the
standard library's.)
"""
