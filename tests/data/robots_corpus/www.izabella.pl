User-agent: *
Request-rate: 1/2
Crawl-delay: 2
Visit-time: 0000-1500
Disallow:
Sitemap: sitemap.xml.gz

