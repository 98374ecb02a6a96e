"""Tests of the HTTP service and MemoryClient."""
