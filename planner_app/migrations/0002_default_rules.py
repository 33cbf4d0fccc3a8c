"""The shipped rule set: bilingual rules, their capabilities, and mappings to built-in tools."""

from django.db import migrations

CAPABILITIES = {
    # name: (description, input type, output type, subsumes, depends on)
    "Arithmetic": ("Evaluate arithmetic", "text", "number", [], []),
    "Summation": ("Add up numbers or a range", "text", "number", ["Arithmetic"], []),
    "ExpressionEvaluation": ("Evaluate a math expression", "text", "number", ["Arithmetic"], []),
    "DiscreteMath": ("Factorials, permutations, combinations", "text", "number", [], []),
    "Probability": ("Probabilities and distributions", "text", "number", [], []),
    "Statistics": ("Mean, median, variance, deviation", "text", "number", [], []),
    "NumberTheory": ("gcd, lcm, primes, modulo", "text", "number", [], []),
    "Hashing": ("Digests: md5, sha1, sha256, sha512", "text", "text", [], []),
    "Base64": ("Base64 encoding and decoding", "text", "text", [], []),
    "JSONProcessing": ("Parse, validate, format JSON", "text", "json", [], []),
    "PDFParsing": ("Read a PDF document", "file", "document", [], []),
    "TextExtraction": ("Extract text from a document", "document", "text", ["PDFParsing"],
                       ["PDFParsing"]),
    "StringManipulation": ("Change text: case, trim, split, join", "text", "text", [], []),
    "WebSearch": ("Search the web", "text", "json", [], []),
    "HTTPRequest": ("Fetch a URL", "url", "text", [], []),
    "Embedding": ("Turn text into a vector", "text", "vector", [], ["TextExtraction"]),
    "IDGeneration": ("Generate identifiers", "none", "text", [], []),
    "Regex": ("Regular expressions", "text", "text", [], []),
    "CodeExecution": ("Run code", "code", "text", [], []),
    "TaskPlanning": ("Plan or schedule tasks", "text", "json", [], []),
    "DateTime": ("Dates, times and time zones", "text", "datetime", [], []),
}  # fmt: skip

RULES = [
    # (name, keywords, capabilities, goal)
    ("sum-zh", ["累加", "求和"], ["Summation"], "sum numbers"),
    ("sum-en", ["sum", "add", "plus", "total"], ["Summation"], "sum numbers"),
    ("sum-of-zh", ["的和", "加到"], ["Summation"], "sum numbers"),
    ("discrete-math", ["factorial", "permutation", "combination", "nPr", "nCr", "choose",
                       "阶乘", "排列", "组合"], ["DiscreteMath"], "count arrangements"),
    ("probability", ["probability", "binomial", "poisson", "概率"], ["Probability"],
     "compute a probability"),
    ("statistics", ["mean", "median", "stddev", "variance", "average", "平均", "标准差", "方差",
                    "统计"], ["Statistics"], "compute statistics"),
    ("number-theory", ["gcd", "lcm", "prime", "modulo", "公约数", "公倍数", "素数", "质数"],
     ["NumberTheory"], "number theory"),
    ("hashing", ["hash", "md5", "sha1", "sha256", "sha512", "哈希"], ["Hashing"], "hash text"),
    ("json", ["json", "parse", "pretty"], ["JSONProcessing"], "process JSON"),
    ("base64", ["base64", "encode", "decode", "编码", "解码"], ["Base64"], "encode or decode"),
    ("pdf", ["pdf", "document"], ["PDFParsing", "TextExtraction"], "read a document"),
    ("extract", ["extract", "read", "提取", "解析", "读取"], ["TextExtraction"], "extract text"),
    ("arithmetic", ["calculate", "compute", "evaluate", "math", "计算", "运算", "等于多少"],
     ["Arithmetic"], "calculate"),
    ("strings", ["upper", "uppercase", "lower", "lowercase", "trim", "split", "join", "reverse",
                 "大写", "小写", "替换"], ["StringManipulation"], "change text"),
    ("search", ["search", "find", "lookup", "look up", "google", "查询", "搜索", "查找", "查一下",
                "搜一下"], ["WebSearch"], "search"),
    ("download", ["download", "fetch", "下载", "获取"], ["HTTPRequest"], "fetch a URL"),
    ("embedding", ["embed", "vector", "embedding", "向量化"], ["Embedding"], "embed text"),
    ("ids", ["uuid", "生成"], ["IDGeneration"], "generate an id"),
    ("regex", ["regex", "正则"], ["Regex"], "match a pattern"),
    ("run-code", ["run", "execute", "运行", "执行"], ["CodeExecution"], "run code"),
    ("planning", ["plan", "schedule", "规划"], ["TaskPlanning"], "plan tasks"),
    ("datetime", ["date", "timezone", "时间", "日期", "时区", "几点"], ["DateTime"],
     "tell the time"),
    # Beyond the 22: the everyday ways people ask for arithmetic and text work.
    ("math-words", ["power", "squared", "cubed", "square", "root", "sqrt", "cube", "times",
                    "minus", "divided", "multiplied", "multiply", "divide", "subtract",
                    "difference", "half", "double", "percent", "mod", "remainder", "log", "ln",
                    "sin", "cos", "tan", "absolute", "area", "circumference", "hypotenuse",
                    "max", "min", "maximum", "minimum", "smallest", "largest", "product",
                    "greatest common", "hcf", "gcf", "least common", "lowest common",
                    "deviation", "radius"], ["Arithmetic"], "calculate"),
    ("math-words-zh", ["加", "减", "乘", "除以", "幂", "次方", "平方", "立方", "根号", "开方",
                       "公因数", "最大值", "最小值", "乘积", "中位数", "倍", "一半", "百分之",
                       "对数", "绝对值", "正弦", "余弦", "正切", "面积", "周长", "斜边", "取模",
                       "余数", "之和", "总和", "等于几", "选法", "排法", "多少种"],
     ["Arithmetic"], "calculate"),
    ("text-words", ["length", "characters", "title", "replace", "substring", "长度", "字符",
                    "反转", "倒过来", "首尾空格", "分割", "标题"], ["StringManipulation"],
     "change text"),
    ("hash-words", ["checksum", "digest"], ["Hashing"], "hash text"),
    ("json-words", ["validate", "minify"], ["JSONProcessing"], "process JSON"),
]  # fmt: skip

PATTERNS = {
    # Expressions the keywords miss: "2^10", "3*(4+5)", "2的10次方", "根号16".
    "arithmetic": [r"\d\s*[-+*/^%]\s*\(*\s*\d", r"sqrt\s*\(", r"次方|平方|立方|根号|乘以|除以"],
    # "time" alone would take "3 times 4"; ask for the ways people ask the time.
    "datetime": [r"\b(what|current) time\b", r"\btime (in|zone|now)\b"],
    # 7!, C(10,3), 52C5, 15%, √49, 3², （3＋4）×５, "2 to the 8th".
    "math-words": [
        r"\d\s*!",
        r"\b[CPA]\(\s*\d",
        r"\d\s*[CP]\s*\d",
        r"\d\s*%",
        r"[√²³×÷＋－]",
        r"\d(st|nd|rd|th)\b",
    ],
    "hash-words": [r"\bsha-?(1|256|512)\b", r"\bmd-?5\b"],
}

MAPPINGS = {
    "calculator": ["Arithmetic", "Summation", "ExpressionEvaluation", "DiscreteMath",
                   "Probability", "Statistics", "NumberTheory"],
    "hash_tool": ["Hashing", "Base64"],
    "string_utils": ["StringManipulation"],
    "json_tools": ["JSONProcessing"],
    "web_search": ["WebSearch"],
    "http_request": ["HTTPRequest"],
    "datetime": ["DateTime"],
}  # fmt: skip


def add_defaults(apps, schema_editor):
    Capability = apps.get_model("planner_app", "Capability")
    IntentRule = apps.get_model("planner_app", "IntentRule")
    CapabilityMapping = apps.get_model("planner_app", "CapabilityMapping")
    ScoringWeights = apps.get_model("planner_app", "ScoringWeights")
    by_name = {
        name: Capability.objects.create(name=name, description=d, input_type=i, output_type=o)
        for name, (d, i, o, _, _) in CAPABILITIES.items()
    }
    for name, (_, _, _, subsumes, depends_on) in CAPABILITIES.items():
        by_name[name].subsumes.set([by_name[n] for n in subsumes])
        by_name[name].depends_on.set([by_name[n] for n in depends_on])
    for position, (name, keywords, capabilities, goal) in enumerate(RULES, start=1):
        rule = IntentRule.objects.create(
            name=name, keywords=keywords, goal=goal, priority=position * 10,
            language="zh" if name.endswith("-zh") else "any",
            patterns=PATTERNS.get(name, []),
        )  # fmt: skip
        rule.capabilities.set([by_name[n] for n in capabilities])
    for tool, capabilities in MAPPINGS.items():
        for capability in capabilities:
            CapabilityMapping.objects.create(capability=by_name[capability], tool=tool)
    ScoringWeights.objects.create()


def remove_defaults(apps, schema_editor):
    for model in ("CapabilityMapping", "IntentRule", "Capability", "ScoringWeights"):
        apps.get_model("planner_app", model).objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("planner_app", "0001_initial")]
    operations = [migrations.RunPython(add_defaults, remove_defaults)]
