"""Compilation of logical plans into Spark Structured Streaming.

This package is the only one that imports pyspark.
"""
