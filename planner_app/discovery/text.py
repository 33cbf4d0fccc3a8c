"""Turn tool descriptions and requests into index terms: words, plurals folded, CJK n-grams.

Chinese text also gets the English words of the tool vocabulary it contains (a small
glossary below), so a Chinese request finds tools described in English, as MCP servers
and our built-ins are, and an English request finds tools described in Chinese.
"""

from __future__ import annotations

import re

_CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# Runs of CJK characters (Han, kana, Hangul: no spaces between words), or of other letters
# and digits.
_TOKEN = re.compile(f"[{_CJK_RANGES}]+|[^\\W_{_CJK_RANGES}]+")
_CJK = re.compile(f"[{_CJK_RANGES}]")
# getUserByName -> get User By Name; HTTPRequest -> HTTP Request; v2Beta -> v2 Beta; but
# an acronym's plural stays whole: getUserIDs -> get User IDs, not get User I Ds.
_VERSION = re.compile(r"v\d+\Z")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])(?![A-Z]s(?![a-z]))")
# IDs, URLs, APIs: folded here, as the plural rule leaves words ending in "is" alone.
_ACRONYM_PLURAL = re.compile(r"[A-Z]{2,}s\Z")

# Function words and request fluff. Not scikit-learn's list: it drops words that name what a
# tool does ("find", "show", "name", "system", "top", "bill", "fire", "call").
_STOP_WORD_TEXT = """
a about after again all also am an and any are as at be been before being both but by
can could did do does doing for from had has have having he her here hers him his how i
if in into is it its itself just let me more most my myself no nor not of off on once
only or other our ours out over own please same she should so some such than that the
their theirs them then there these they this those through to too under until up very
was we were what when where which while who whom why will with would you your yours
help want wants need needs like kindly provide tell give us additionally
"""
STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())

# Plurals that no suffix rule folds; the rules below handle the regular ones.
_IRREGULAR = {
    "children": "child",
    "people": "person",
    "men": "man",
    "women": "woman",
    "mice": "mouse",
    "geese": "goose",
    "teeth": "tooth",
    "feet": "foot",
    "indices": "index",
    "matrices": "matrix",
    "vertices": "vertex",
    "analyses": "analysis",
    "criteria": "criterion",
    "phenomena": "phenomenon",
}
# Words ending in "s" that are not plurals, or whose plural rule would mangle them.
_NOT_PLURAL_ENDINGS = ("ss", "us", "is", "ous", "ics")
_NOT_PLURAL = frozenset({"news", "series", "species", "means", "lens", "gas", "bias", "atlas"})

# Chinese words of the tool vocabulary (what a tool does, what it works on) -> English words.
# Dictionary-based query translation, the classic cross-language retrieval method: a word
# found anywhere in a run of Chinese characters adds its English words as terms. Words of
# one character are left out: they hide inside unrelated words.
_GLOSSARY_TEXT = """
搜索 搜寻 检索 查找 寻找: search find | 查询: query search lookup | 查看 显示: show view get
获取 取得 拿到: get fetch | 读取 阅读: read | 写入: write | 保存 存储 储存: save store write
创建 新建 建立: create new | 删除 移除: delete remove | 更新 修改: update modify edit
编辑: edit | 列出 列表 列举 清单: list | 打开: open | 关闭: close | 发送 发出: send
下载 抓取: download fetch | 上传: upload | 转换 换算 转成 转为: convert | 翻译: translate
计算 运算 算出 等于多少 是多少: calculate compute arithmetic | 数学: math | 表达式: expression
求和 总和 之和 相加: sum add | 平均 均值: mean average | 中位数: median | 方差: variance
标准差: stddev deviation | 统计: statistics | 百分之 百分比: percent | 阶乘: factorial
质数 素数: prime | 概率: probability | 公约数: gcd divisor | 公倍数: lcm multiple
平方根 根号 开方: sqrt root | 对数: log logarithm | 四舍五入 保留: round
哈希 散列 摘要值: hash digest | 加密: encrypt hash | 编码: encode | 解码: decode
校验 验证 检查: validate check verify | 有效 合法: valid | 格式化: format pretty print
美化 缩进: pretty print indent | 解析: parse | 提取: extract | 替换: replace
大写: upper uppercase | 小写: lower lowercase | 首字母: title | 反转 倒序 倒过来: reverse
长度 多长: length | 拆分 分割 切分: split | 合并 拼接 连接: join merge
去掉空格 空白: trim whitespace | 字符串 文本 文字: string text | 字符: character | 排序: sort
过滤 筛选: filter | 比较 对比: compare | 文件: file | 文件夹 目录: directory folder
路径: path | 内容: content | 仓库 代码库 存储库: repository repo | 代码: code
议题 问题: issue | 分支: branch | 提交: commit | 拉取请求 合并请求: pull request
项目: project | 用户: user | 网页 页面: web page | 网站: website web site
网址 链接: url link | 网络 网上 互联网 上网 在线: web internet online | 请求: request
接口: api | 数据: data | 数据库: database | 表格: table | 时间: time | 日期: date
时区: timezone time zone | 几点: time now | 现在 当前 目前 此刻: current now | 今天: today
明天: tomorrow | 星期 周末: week weekend weekday | 日历: calendar | 事件 活动: event
会议: meeting | 提醒: reminder | 天气: weather | 预报: forecast | 气温 温度: temperature
下雨 降雨: rain | 空气: air | 质量: quality | 警报 预警: alert warning | 城市: city
地址: address | 地图: map | 位置 地点: location | 路线 导航: route | 新闻: news
最新 最近: latest recent | 邮件 邮箱: email mail | 消息: message
图片 图像 照片: image picture photo | 视频: video | 音乐 歌曲: music song | 股票 股价: stock
价格: price | 汇率: exchange rate | 货币: currency | 语言: language | 结果: result
信息 资料: information | 详情 详细: detail | 摘要 总结: summary summarize | 数字 数值: number
整数: integer | 随机: random | 生成: generate | 测试: test | 主题: topic
处理: process handle | 向量 嵌入: vector embedding | 回显 复述 原样: echo
等待 暂停 休眠: sleep wait | 失败 报错: fail error | 进程: process
订单: order | 支付 付款: payment pay | 航班 机票: flight | 酒店 宾馆: hotel
预订 预约 预定: book reservation | 餐厅 饭店: restaurant | 电影: movie film | 菜谱 食谱: recipe
营养: nutrition | 健康: health | 体育 运动: sport | 比赛 赛事: match game | 游戏: game
词典 字典: dictionary | 单词: word | 短信: sms message | 电话 手机号 电话号码: phone number
快递 物流: shipping delivery tracking | 公司 企业: company | 职位 招聘 工作岗位: job
加密货币 数字货币: cryptocurrency crypto | 比特币: bitcoin | 区块链: blockchain
社交: social | 推文: tweet | 评论: comment review | 评分: rating | 笑话: joke | 名言: quote
足球: football soccer | 篮球: basketball | 机场: airport | 火车 列车: train | 汽车 车辆: car vehicle
停车: parking | 医院: hospital | 药品 药物: drug medicine | 人口: population | 国家: country
邮编 邮政编码: zip postal code | 二维码: qr code | 短网址 短链接: short url | 截图 截屏: screenshot
浏览器: browser | 文档: document | 笔记: note | 任务 待办: task todo | 账户 账号: account
密码: password | 登录: login | 订阅: subscribe subscription | 通知: notification
"""


def _glossary(text: str) -> dict[str, str]:
    pairs = (entry.split(":") for entry in text.replace("\n", " | ").split("|") if entry.strip())
    return {word: english.strip() for words, english in pairs for word in words.split()}


GLOSSARY = _glossary(_GLOSSARY_TEXT)


def stem(word: str) -> str:
    """Return a word with its plural and -ing/-ed endings folded: 'cities' -> 'city'.

    Deliberately light (the S-stemmer family, plus the -ing/-ed step of Porter's): it
    folds the forms a tool request and a tool description disagree on ('fetching' and
    'fetches', 'rounded' and 'round') and leaves everything else alone, so a stem is
    still a word and never merges unrelated terms the way an aggressive stemmer can.
    """
    return _fold_ending(_fold_plural(word))


def _fold_plural(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) <= 3 or not word.endswith("s") or word.endswith(_NOT_PLURAL_ENDINGS):
        return word
    if word in _NOT_PLURAL:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if word.endswith("oes") and len(word) > 4:
        return word[:-2]
    return word[:-1]


_DOUBLED = re.compile(r"([b-df-hj-kmnp-rtv-y])\1\Z")  # a doubled consonant but l, s, z
_SHORT = re.compile(r"[^aeiouy][aeiouy][^aeiouwxy]\Z")  # cvc: 'nam' (named) -> 'name'


def _fold_ending(word: str) -> str:
    """Return a word without its -ing or -ed ending, spelled as its base: 'creating' -> 'create'."""
    if word.endswith("ing"):
        base = word[:-3]
    elif word.endswith("ed") and not word.endswith("eed"):
        base = word[:-2]
    else:
        return word
    if len(base) < 3 or not re.search("[aeiouy]", base):
        return word
    if base.endswith(("at", "bl", "iz")):  # creat(ing) -> create, enabl(ed) -> enable
        return base + "e"
    if _DOUBLED.search(base):  # runn(ing) -> run
        return base[:-1]
    if len(base) == 3 and _SHORT.match(base):  # nam(ed) -> name, cod(ing) -> code
        return base + "e"
    if len(base) == 3:
        return word  # 'string', 'during', 'shed': too short to tell
    return base


def _cjk_terms(run: str) -> list[str]:
    """Return the characters and character pairs of a CJK run (it has no word boundaries)."""
    if len(run) == 1:
        return [run]
    return list(run) + [run[i : i + 2] for i in range(len(run) - 1)]


def _translated_terms(run: str) -> list[str]:
    """Return the English terms of the glossary words in a CJK run, in the run's order."""
    found = sorted((run.find(word), word) for word in GLOSSARY if word in run)
    return [term for _, word in found for term in _TRANSLATIONS[word]]


def _analyze(text: str) -> list[tuple[str, bool]]:
    """Return the index terms of a text, each with whether it may form a word pair."""
    terms: list[tuple[str, bool]] = []
    for token in _TOKEN.findall(_CAMEL.sub(" ", text)):
        if _CJK.match(token):
            terms.extend((term, False) for term in _cjk_terms(token))
            terms.extend((term, False) for term in _translated_terms(token))
            continue
        if _ACRONYM_PLURAL.match(token):
            token = token[:-1]
        word = token.lower()
        # Numbers in a request are argument values (an id, a year), in a tool's name a
        # version ("v2"): neither says what the tool does.
        if word in STOP_WORDS or len(word) == 1 or word.isdigit() or _VERSION.match(word):
            continue
        terms.append((stem(word), True))
    return terms


def analyze(text: str) -> list[str]:
    """Return the index terms of a text: lower-case stems without stop words, CJK n-grams."""
    return [term for term, _ in _analyze(text)]


def analyze_with_pairs(text: str) -> list[str]:
    """Return the index terms of a text, then each pair of adjacent word terms ('movie detail').

    A pair keeps a little of the word order a bag of words loses: "movies details" names
    the service "Movies details" more than it names every movie tool and every details
    tool. A pair holds a space, so it never collides with a single term. CJK terms and
    their glossary translations get no pairs (character pairs are already terms, and a
    translation's words are alternatives, not a phrase).
    """
    terms = _analyze(text)
    words = [term if pairable else None for term, pairable in terms]
    pairs = [f"{a} {b}" for a, b in zip(words, words[1:], strict=False) if a and b]
    return [term for term, _ in terms] + pairs


# The glossary's English words as index terms (stop words out, plurals folded).
_TRANSLATIONS = {
    word: tuple(term for term, _ in _analyze(english)) for word, english in GLOSSARY.items()
}
