User-agent: *
Request-rate: 60/1m
Visit-time: 0000-0600
Disallow: /*?fdesid
Disallow: /*?view
Disallow: /*?memo
Disallow: /*?removeMemo
Disallow: /*?query
Disallow: /*?listview
Disallow: /*?ppp
Disallow: /*?galleryview
Disallow: /misc/
Disallow: /t3lib/
Disallow: /typo3/
Disallow: /sf2/
Sitemap: https://www.bikester.pl/sf-media/iscommerce-shop/sitemaps/bkpl/sitemapOverview.xml

