sitemap: http://www.markit.com.pl/sitemap.xml

User-agent: *
Disallow: /admin/
Disallow: /pear/
Disallow: /includes/
Disallow: /libs/
Disallow: /templates/
Disallow: /tinymcpuk/

User-agent: *
Crawl-delay: 5
Request-rate: 1/5
Visit-time: 2200-0845
