"""Puts this folder on sys.path so the tests can import the numpy reference model (llm_reference.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
