User-agent: *
Allow: /
Disallow: /date
Disallow: /data
Disallow: /temat
Disallow: /kategoria
Disallow: /author
Disallow: /logowanie
Disallow: /logowanie/?redirect_to=
Disallow: /page
Disallow: /?s=
Disallow: feed
Disallow: comment
Disallow: *feed*
Disallow: *comment*
Crawl-delay: 500
Request-rate: 1/500
Visit-time: 0100-0500

User-agent: netEstate NE Crawler (+http://www.website-datenbank.de/)
Disallow: /

