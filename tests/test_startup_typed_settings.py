"""The typed ``WALSH_`` settings a component is handed hold only values the
start-up check accepts: they are built by one reader that checks every
value, refuses what the check refuses with the check's message, and names
every problem at once. Nothing else builds them."""

from __future__ import annotations

import dataclasses

import pytest
from scrapy import Spider
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from scrapy_walsh_research._runtime.context import CrawlContext
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.settings.check import problems
from scrapy_walsh_research.settings.walsh import WalshSettings

#: a value no crawl accepts for each kind of check -> what the refusal says
REFUSED = {
    "WALSH_MIN_DELAY": (0.2, "WALSH_MIN_DELAY=0.2: R4 allows at most one request"),
    "WALSH_PACING_MARGIN": (-1, "WALSH_PACING_MARGIN=-1.0: it is added to every interval"),
    "WALSH_POLICY_TTL": (3e7, "WALSH_POLICY_TTL=3e+07: an opt-out would wait"),
    "WALSH_VISIT_TIME_WAIT": (-1, "WALSH_VISIT_TIME_WAIT=-1: how long targets wait"),
    "WALSH_POLICY_CACHE_SIZE": (0, "WALSH_POLICY_CACHE_SIZE=0: a cache needs room"),
    "WALSH_LIST_LOOKAHEAD": ("many", "WALSH_LIST_LOOKAHEAD='many': a cache bound is a whole"),
    "WALSH_AUDIT_RETENTION": (0, "WALSH_AUDIT_RETENTION=0: the audit log is the evidence"),
    "WALSH_STATE_TTL": (0, "WALSH_STATE_TTL=0: a number of seconds above 0"),
    "WALSH_SITEMAP_MIN_TARGETS": (1, "WALSH_SITEMAP_MIN_TARGETS=1: a host's sitemap"),
    "WALSH_ADAPTIVE_FACTOR": (1, "Set WALSH_ADAPTIVE_FACTOR to 4 or more"),
    "WALSH_PURPOSES": ("tdm,resale", "WALSH_PURPOSES names 'resale': not a purpose"),
    "WALSH_BLOCKLIST_EXTRA": ('["a.test", 3]', "WALSH_BLOCKLIST_EXTRA: every item must be a string"),
    "WALSH_BLOCKLIST_URL": (
        "http://operator.test/list.json",
        "WALSH_BLOCKLIST_URL='http://operator.test/list.json' is not an https URL",
    ),
    "WALSH_AUDIT_URL": ("mysql://db.test/audit", "WALSH_AUDIT_URL='mysql://db.test/audit': the fleet"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_no_component_is_handed_typed_settings_holding_a_refused_value(name):
    value, says = REFUSED[name]
    crawler = get_crawler(Spider, {name: value})
    with pytest.raises(WalshConfigurationError, match="refusing to crawl") as refused:
        CrawlContext.for_crawler(crawler).settings  # noqa: B018 (what a component asks)
    assert says in str(refused.value)
    # the start-up check refuses it with the same words
    assert any(says in line for line in problems(Settings({name: value})))


def test_every_refused_value_is_named_at_once():
    settings = Settings({name: value for name, (value, _) in REFUSED.items()})
    with pytest.raises(WalshConfigurationError) as refused:
        WalshSettings.from_settings(settings)
    for _, says in REFUSED.values():
        assert str(refused.value).count(says) == 1, says


def test_a_value_that_is_no_number_is_refused_naming_it_not_crashed_on():
    with pytest.raises(WalshConfigurationError, match="WALSH_MIN_DELAY='soon': not a number"):
        WalshSettings.from_settings(Settings({"WALSH_MIN_DELAY": "soon"}))


def test_the_typed_settings_cannot_be_built_around_the_reader():
    accepted = WalshSettings.from_settings(Settings())
    with pytest.raises(TypeError, match="from_settings"):
        dataclasses.replace(accepted, min_delay=0.2)
    with pytest.raises(TypeError, match="from_settings"):
        WalshSettings(**dataclasses.asdict(accepted))
