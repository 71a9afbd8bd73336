User-agent: YandexNews
Allow: /rss/yandex.xml

User-agent: *
Disallow: /search
Disallow: /preview/
Disallow: /n/
Disallow: /api
Clean-param: nw&following_c&keepThis

User-agent: YandexBot
Disallow: /search
Disallow: /preview/
Disallow: /n/
Disallow: /api
Disallow: */amp

User-agent: Googlebot
Disallow: /novosti-partnerov
Disallow: /search
Disallow: /preview/
Disallow: /n/
Disallow: /api

Sitemap: https://tass.ru/sitemap.xml
