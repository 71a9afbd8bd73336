User-agent: *
Visit-time: 2300-0700

Disallow: test.php
Disallow: /admin/
Disallow: /scripts/
Disallow: /js/
Disallow: /css/

Sitemap: http://www.ksactivumsports.pl/sitemap.xml
