"""The reference engine: a pure-Python evaluator of the exact seed semantics on a
finite event list, the oracle the Spark engine is tested against, and pull queries.

It imports the XML functions (``roses_app.xmlfn``) only inside functions, so that
importing it loads neither lxml nor pyspark; :mod:`roses_app.algebra.reference.evaluator`
imports every operator's handler.
"""
