User-agent: *
Crawl-delay: 2
Request-rate: 1/1s

User-agent: *
Crawl-delay: 30
User-agent: *
Disallow: /application
Disallow: /environment
Allow: /environment/cache/images
Disallow: /libraries
Disallow: /*/fav/add
Disallow: /*/p/comment/add
Disallow: /*/p/mail/recommend
Disallow: /*/p/q
Disallow: /*/searchquery

