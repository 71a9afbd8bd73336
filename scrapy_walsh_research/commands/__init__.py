"""Scrapy commands shipped with the bundle (registered as ``scrapy.commands`` entry points)."""
