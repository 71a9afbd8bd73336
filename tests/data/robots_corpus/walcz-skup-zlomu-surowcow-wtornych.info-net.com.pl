User-agent: *
Disallow: /
Visit-time: 0100-0500
Crawl-delay: 5
Request-rate: 1/5

User-agent: Googlebot
Allow: /
Disallow: /tmp/
Disallow: /caches/
Disallow: ajax
Disallow: pdf

User-agent: bingbot
Allow: /
Disallow: /tmp/
Disallow: /caches/
Disallow: ajax
Disallow: pdf

User-agent: Tip-Ex Robot
Disallow: /

User-agent: UptimeRobot
Disallow: /

User-agent: SMTBot
Disallow: /
