"""Scrapy extensions: progress logging and the heap freeze for long lists."""
