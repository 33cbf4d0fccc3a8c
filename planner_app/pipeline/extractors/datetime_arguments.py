"""Read the datetime tool's arguments: the time now in a named place (city, country, IANA zone)."""

from __future__ import annotations

import re
from functools import lru_cache
from zoneinfo import ZoneInfo

from planner_app.pipeline.extractors.request_numbers import HAS_DIGIT
from planner_app.pipeline.extractors.request_text import (
    Extraction,
    english_words,
    found_arguments,
    ignoring_case,
    needs_llm,
)

CITY_ZONES: dict[str, tuple[str, ...]] = {
    "Asia/Tokyo": ("tokyo", "japan", "osaka", "东京", "日本", "大阪"),
    "Asia/Shanghai": ("beijing", "shanghai", "china", "shenzhen", "guangzhou", "北京", "上海",
                      "中国", "深圳", "广州", "杭州", "成都"),
    "Asia/Hong_Kong": ("hong kong", "香港"),
    "Asia/Taipei": ("taipei", "台北"),
    "Asia/Singapore": ("singapore", "新加坡"),
    "Asia/Seoul": ("seoul", "korea", "首尔", "韩国"),
    "Asia/Kolkata": ("india", "delhi", "new delhi", "mumbai", "bangalore", "印度", "新德里",
                     "孟买"),
    "Asia/Dubai": ("dubai", "迪拜"),
    "Asia/Bangkok": ("bangkok", "曼谷", "泰国"),
    "Europe/London": ("london", "uk", "england", "伦敦", "英国"),
    "Europe/Paris": ("paris", "france", "巴黎", "法国"),
    "Europe/Berlin": ("berlin", "germany", "柏林", "德国"),
    "Europe/Madrid": ("madrid", "spain", "马德里", "西班牙"),
    "Europe/Rome": ("rome", "italy", "罗马", "意大利"),
    "Europe/Moscow": ("moscow", "莫斯科", "俄罗斯"),
    "America/New_York": ("new york", "nyc", "boston", "washington", "纽约", "波士顿", "华盛顿"),
    "America/Chicago": ("chicago", "芝加哥"),
    "America/Denver": ("denver", "丹佛"),
    "America/Los_Angeles": ("los angeles", "san francisco", "seattle", "洛杉矶", "旧金山",
                            "西雅图"),
    "America/Toronto": ("toronto", "多伦多"),
    "America/Vancouver": ("vancouver", "温哥华"),
    "America/Sao_Paulo": ("sao paulo", "são paulo", "圣保罗"),
    "America/Mexico_City": ("mexico city", "墨西哥城"),
    "Australia/Sydney": ("sydney", "悉尼"),
    "Australia/Melbourne": ("melbourne", "墨尔本"),
    "Pacific/Auckland": ("auckland", "new zealand", "奥克兰", "新西兰"),
    "Africa/Cairo": ("cairo", "开罗", "埃及"),
    "UTC": ("utc", "gmt", "coordinated universal time", "协调世界时", "世界标准时间"),
}  # fmt: skip
_ZONE_OF = {name: zone for zone, names in CITY_ZONES.items() for name in names}
_PLACE = ignoring_case(
    "|".join(
        english_words(re.escape(name).replace(r"\ ", r"\s+")) if name.isascii() else re.escape(name)
        for name in sorted(_ZONE_OF, key=len, reverse=True)
    )
)
_IANA_ZONE = re.compile(r"(?<![A-Za-z/])[A-Z][A-Za-z_]+(?:/[A-Z][A-Za-z_+-]+){1,2}")
_TIME_WORDS = ignoring_case(
    english_words(r"time|clock|now|date|today") + "|时间|几点|现在|日期|今天|几号|钟"
)
_NOT_NOW = ignoring_case(
    english_words(
        r"convert|difference|between|until|ago|after|later|before|tomorrow|yesterday|add|plus|"
        r"minus|days?|hours?|minutes?|weeks?|months?|years?|when|sunrise|sunset|weather"
    )
    + "|明天|昨天|之后|以后|之前|以前|相差|时差|换算|转换|倒计时|天后|小时|分钟|日出|日落|天气"
)
_UNKNOWN_PLACE_EN = ignoring_case(
    english_words(r"in|at|for") + r"\s+(?:the\s+)?(?P<place>[A-Z][\w'. -]+)"
)
_ZH_TIME_FILLER = re.compile(
    "现在|当前|目前|此刻|请问|告诉我|帮我|查一下|查询|看看|看一下|时间|几点了?|几点钟|是|的|了|吗|呢"
    "|多少|什么|时候|日期|今天|几号|钟|点|地区|当地|本地|一下|[\\s?？。,，!！]"
)


@lru_cache(maxsize=256)
def _is_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ValueError, KeyError, OSError):  # ZoneInfoNotFoundError is a KeyError
        return False
    return True


def extract_datetime(request: str) -> Extraction:
    """Return datetime's arguments for "the time now" in a named place."""
    if not _TIME_WORDS.search(request):
        return needs_llm("no question about the time now")
    other = _NOT_NOW.search(request)
    if other or HAS_DIGIT.search(_IANA_ZONE.sub(" ", request)):
        what = repr(other[0]) if other else "a date or number"
        return needs_llm(f"more than the time now ({what}); only 'time now in a place' is read")
    zones = {_ZONE_OF[m[0].lower().replace("  ", " ")] for m in _PLACE.finditer(request)}
    zones |= {m[0] for m in _IANA_ZONE.finditer(request) if _is_zone(m[0])}
    if len(zones) > 1:
        return needs_llm(f"several places named ({', '.join(sorted(zones))})")
    if zones:
        zone = zones.pop()
        return found_arguments({"operation": "now", "timezone": zone}, f"the time now in {zone}")
    unknown = _UNKNOWN_PLACE_EN.search(request)
    rest = _ZH_TIME_FILLER.sub("", request) if not request.isascii() else ""
    if unknown or rest:
        place = unknown["place"].strip() if unknown else rest
        return needs_llm(f"no time zone known for {place!r}")
    return found_arguments(
        {"operation": "now"}, "the time now, no place named: the tool answers in UTC"
    )
