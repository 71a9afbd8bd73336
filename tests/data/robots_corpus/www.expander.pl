User-agent: *
Disallow: /wp-admin/
Allow: /wp-admin/admin-ajax.php

User-Agent: MJ12bot
Crawl-Delay: 20

User-agent: SeznamBot
Request-rate: 1/20s

User-agent: "Vegi bot (we follow your robots.txt settings before crawling, you can slow down the bot by change the Crawl-Delay parameter in the settings.if you have an enquiry, please email to: abuse-report@terrykyleseoagency.com)"
Disallow: /

User-agent: Vegi bot
Disallow: /
Crawl-delay: 120

