Sitemap: http://agrotrader.pl/sitemaps/index.xml
Sitemap: http://agrotrader.pl/sitemaps/towns-categories-brands-index.xml
Sitemap: http://agrotrader.pl/sitemaps/regions-categories-brands-index.xml
Sitemap: http://agrotrader.pl/sitemaps/towns-categories-index.xml

User-agent: *
Disallow: /nowe-ogloszenie
Disallow: /aktywacja-ogloszenia
Disallow: /moje-konto
Disallow: /moje-konto/*
Disallow: /api/v1/*
Allow: /

User-agent: Mediapartners-Google
Allow: /
