##ACAP version=1.0

User-Agent: *
Disallow: /*trackback
Disallow: /*/feed/$
Disallow: /*/feed/rss/$
Disallow: /*/trackback/$
Disallow: /author/
Disallow: /comments/
Allow: /wp-content/upload

ACAP-crawler: *
ACAP-disallow-crawl: /*.js
ACAP-disallow-crawl: /*trackback
ACAP-disallow-crawl: /*.css
ACAP-disallow-crawl: /*/feed/$
ACAP-disallow-crawl: /*/feed/rss/$
ACAP-disallow-crawl: /*/trackback/$
ACAP-disallow-crawl: /wp-
ACAP-allow-crawl: /wp-content/upload

User-agent: Slurp
Disallow: /

User-agent: Rogerbot
Disallow: /

User-agent: SiteExplorer
Disallow: /

user-agent: AhrefsBot
disallow: /

user-agent: Twice
disallow: /

user-agent: Yand
disallow: /

user-agent: Yahoo
disallow: /

user-agent: Voil
disallow: /

user-agent: libw
disallow: /

user-agent: Java
disallow: /

user-agent: Sogou
disallow: /

user-agent: psbot
disallow: /

user-agent: Exabot
disallow: /

user-agent: boitho
disallow: /

user-agent: ajSitemap
disallow: /

user-agent: Rankivabot
disallow: /

user-agent: DBLBot
disallow: /

user-agent: MJ1
disallow: /

user-agent: Rankivabot
disallow: /

user-agent: ask
disallow: /

user-agent: Roge
disallow: /

user-agent: Baidu
disallow: /

user-agent: site
disallow: /

user-agent: Ahre
disallow: /

user-agent: seo
disallow: /

user-agent: MJ12bot
disallow: /
