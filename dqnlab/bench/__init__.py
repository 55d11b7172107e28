"""Benchmarks: commands that measure speed and learning and print (or write) figures."""
