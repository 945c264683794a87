"""Rubric items scored by LLM judges, one isolated judge per item (``judges``), the evidence
they are shown (``judge_context``), and how their scores combine with the tests' (``scoring``).
"""
