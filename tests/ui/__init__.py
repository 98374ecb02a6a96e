"""Tests of the web inspector (/ui) and the offline API docs, in a real headless Chromium."""
