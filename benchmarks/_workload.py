"""Deterministic synthetic conversations for the benchmarks.

Every store the benchmarks build (ours, the raw floor's, upstream's, the adoption
input) is filled from the same stream, so the three sides search the same text.
The text is made of pseudo-words with a Zipf-like frequency (that is what makes a
posting list long or short) plus *planted* terms with known frequencies, so that each
search kind has a realistic number of hits at every store size:

    docker            ~0.8 % of messages      (word)
    "docker compose"  ~0.4 %                  (phrase)
    deploy*           ~1 %                    (prefix: deploy, deployed, deploying, deployment)
    kubernetes/swarm  ~0.5 % / 0.2 %          (boolean)
    chat-send         ~0.2 %                  (hyphenated)
    记忆断裂           ~3 % of CJK messages    (trigram)
    记忆               ~20 % of CJK messages   (too short for trigram: the fallback path)

5 % of user/assistant messages are Chinese; a third of assistant turns call 1-2 tools and
are followed by one tool row per call. Generation streams one session at a time, so a
1M-message store never sits in memory.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Iterator

#: bump when the generated text changes, so cached stores are rebuilt
WORKLOAD_VERSION = 3

BASE_TIME = 1_750_000_000.0
SOURCES = (("cli", 50), ("telegram", 25), ("discord", 15), ("cron", 5), ("slack", 5))
TOOLS = ("terminal", "read_file", "write_file", "web_search", "patch", "browser_navigate")
PLANTED = (
    ("docker compose up", 0.004),
    ("docker", 0.004),
    ("kubernetes", 0.005),
    ("swarm", 0.002),
    ("deploy", 0.003),
    ("deployment", 0.003),
    ("deployed", 0.002),
    ("deploying", 0.002),
    ("chat-send", 0.002),
)
_SYLLABLES = (
    "ka ti ro me su la ne po vi da re mo lu sa te ni ko ba fe gi ha ju li ma no pe qu "
    "ra se to un ve wa xe yo ze ar en or is al es on ul"
).split()
# The two characters of the fallback probe and the rest of the trigram probe are kept
# out of the random pool, so the planted frequencies are the real ones.
_CJK_RESERVED = set("记忆断裂")
_CJK_POOL = [
    c
    for c in "的一是不了在人有我他这个们中来上大为和国地到以说时要就出会可也你对生能而子那得于着下自之年过发后作里用道行所然家种事成方多经么去法学如都同现当没动面起看定天分还进好小部其些主样理心她本前开但因只从想实日军者意无力它与长把机十民第公此已工使情明性知全三又关点正业外将两高间由问很最重并物手应战向头文体政美相见被利什二等产或新己制身果加西斯月话合回特代内信表化老给世位次度门任常先海通教儿原东声提立及比员解水名真论处走义各入几口认条平系气题活尔更别打女变四神总何电数安少报才结反受目太量再感建务做接必场件计管期市直德资命山金指克许统区保至队形社便空决治展马科司五基眼书非则听白却界达光放强即像难且权思王象完设式色路记南品住告类求据程北边死张该交规万取拉格望觉术领共确传师观清今切院让识候带导争运笑飞风步改收根干造言联持组每济车亲极林服快办议往元英士证近失转夫令准布始怎呢存未远叫台单影具罗字爱击流备兵连调深商算质团集百需价花党华城石级整府离况亚请技际约示复病息究线似官火断精满支视消越器容照须九增研写称企八功吗包片史委乎查轻易早曾除农找装广显吧阿李标谈吃图念六引历首医局突专费号尽另周较注语仅考落青随选列武红响虽推势参希古众构房半节土投某案黑维革划敌致陈律足态护七兴派孩验责营星够章音跟志底站严巴例防族供效续施留讲型料终答紧黄绝奇察母京段依批群项故按河米围江织害斗双境客纪采举杀攻父苏密低朝友诉止细愿千值仍男钱破网热助倒育属坐帝限船脸职速刻乐否刚威毛状率甚独球般普怕弹校苦创假久错承印晚兰试股拿脑预谁益阳若哪微尼继送急血惊伤素药适波夜省初喜卫源食险待述陆习置居劳财环排福纳欢雷警获模充负云停木游龙树疑层冷洲冲射略范竟句室异激汉村哈策演简卡罪判担州静退既衣您宗积余痛检差富灵协角占配征修皮挥胜降阶审沉坚善妈刘读啊超免压银买皇养伊怀执副乱抗犯追帮宣佛岁航优怪香著田铁控税左右份穿艺背阵草脚概恶块顿敢守酒岛托央户烈洋哥索胡款靠评版宝座释景顾弟登货互付伯慢欧换闻危忙核暗姐介坏讨丽良序升监临亮露永呼味野架域沙掉括舰鱼杂误湾吉减编楚肯测败屋跑梦散温困剑渐封救贵枪缺楼县尚毫移娘朋画班智亦耳恩短掌恐遗固席松秘谢鲁遇康虑幸均销钟诗藏赶剧票损忽巨炮旧端探湖录叶春乡附吸予礼港雨呀板庭妇归睛饭额含顺输摇招婚脱补谓督毒油疗旅泽材灭逐莫笔亡鲜词圣择寻厂睡博勒烟授诺伦岸奥唐卖俄炸载洛健堂旁宫喝借君禁阴园谋宋避抓荣姑孙逃牙束跳顶玉镇雪午练迫爷篇肉嘴馆遍凡础洞卷坦牛宁纸诸训私庄祖丝翻暴森塔默握戏隐熟骨访弱蒙歌店鬼软典欲萨伙遭盘爸扩盖弄雄稳忘亿刺拥徒姆杨齐赛趣曲刀床迎冰虚玩析窗醒妻透购替塞努休虎扬途侵刑绿兄迅套贸毕唯谷轮库迹尤竞街促延震弃甲伟麻川申缓潜闪售灯针哲络抵朱埃抱鼓植纯夏忍页杰筑折郑贝尊吴秀混臣雅振染盛怒舞圆搞狂措姓残秋培迷诚宽宇猛摆梅毁伸摩盟末乃悲拍丁赵滑淡" if c not in _CJK_RESERVED]  # noqa: E501


def _words(rng: random.Random, n: int) -> list[str]:
    out = set()
    while len(out) < n:
        out.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(out)


@dataclass
class Vocabulary:
    rng: random.Random
    words: list[str] = field(default_factory=list)
    cum: list[float] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    cjk_sentences: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, seed: int) -> "Vocabulary":
        rng = random.Random(seed)
        v = cls(rng)
        v.words = _words(rng, 4000)
        rng.shuffle(v.words)  # Zipf rank must not follow the alphabet
        total = 0.0
        for rank in range(1, len(v.words) + 1):
            total += 1.0 / rank**1.07
            v.cum.append(total)
        for _ in range(6000):
            ws = rng.choices(v.words, cum_weights=v.cum, k=rng.randint(5, 16))
            v.sentences.append(" ".join(ws).capitalize() + ".")
        for _ in range(1500):
            v.cjk_sentences.append("".join(rng.choices(_CJK_POOL, k=rng.randint(8, 30))) + "。")
        for _ in range(3000):
            ws = rng.choices(v.words, cum_weights=v.cum, k=rng.randint(2, 7))
            path = "/".join(rng.choices(v.words, k=rng.randint(1, 3)))
            v.log_lines.append(
                f"{rng.choice(('INFO', 'DEBUG', 'WARN'))} src/{path}.py:{rng.randint(1, 999)} "
                + " ".join(ws)
            )
        return v


class Generator:
    """Streams (session_row, [message_row, ...]) for a store of ``n_messages``.

    ``long_session`` puts that many messages in the first session (the
    ``get_messages`` benchmark reads it). Sessions number ``n_messages // 10`` so the
    100k store has the 10k sessions ``list_sessions_rich`` is measured on.
    """

    def __init__(self, n_messages: int, *, seed: int = 1, long_session: int = 0):
        self.n_messages = n_messages
        self.long_session = long_session if n_messages >= long_session * 2 else 0
        self.seed = seed
        self.vocab = Vocabulary.build(seed)
        self.rng = random.Random(seed * 7919 + n_messages)
        self._source_names = [s for s, _ in SOURCES]
        self._source_weights = [w for _, w in SOURCES]
        self._call_seq = 0

    # ----------------------------------------------------------------- text
    def _plant(self, text: str) -> str:
        rng = self.rng
        for term, p in PLANTED:
            if rng.random() < p:
                words = text.split(" ")
                words.insert(rng.randrange(len(words) + 1), term)
                text = " ".join(words)
        return text

    def _prose(self, lo: int, hi: int) -> str:
        rng = self.rng
        if rng.random() < 0.05:
            text = "".join(rng.choices(self.vocab.cjk_sentences, k=rng.randint(1, 4)))
            r = rng.random()
            if r < 0.03:
                text = text[: len(text) // 2] + "记忆断裂" + text[len(text) // 2 :]
            elif r < 0.2:
                text = text[: len(text) // 3] + "记忆" + text[len(text) // 3 :]
            return text
        return self._plant(" ".join(rng.choices(self.vocab.sentences, k=rng.randint(lo, hi))))

    def _tool_output(self) -> str:
        rng = self.rng
        return self._plant("\n".join(rng.choices(self.vocab.log_lines, k=rng.randint(3, 25))))

    def tool_calls(self, n: int) -> list[dict]:
        rng = self.rng
        calls = []
        for _ in range(n):
            self._call_seq += 1
            name = rng.choice(TOOLS)
            arg = " ".join(rng.choices(self.vocab.words, cum_weights=self.vocab.cum, k=3))
            if rng.random() < 0.1:
                arg += " docker"
            calls.append(
                {
                    "id": f"call_{self._call_seq:08x}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps({"command": arg})},
                }
            )
        return calls

    # ----------------------------------------------------------------- messages (API shape)
    def message(self, role: str) -> dict:
        """One message as keyword arguments for ``append_message``."""
        if role == "user":
            return {"role": "user", "content": self._prose(1, 3)}
        if role == "assistant":
            return {"role": "assistant", "content": self._prose(2, 6), "finish_reason": "stop"}
        raise ValueError(role)

    def turn(self) -> list[dict]:
        """A user turn and the assistant's answer, with tool calls a third of the time."""
        rng = self.rng
        msgs = [self.message("user")]
        if rng.random() < 0.33:
            calls = self.tool_calls(rng.randint(1, 2))
            msgs.append(
                {"role": "assistant", "content": self._prose(1, 2), "tool_calls": calls,
                 "finish_reason": "tool_calls"}
            )
            for call in calls:
                msgs.append(
                    {"role": "tool", "content": self._tool_output(),
                     "tool_name": call["function"]["name"], "tool_call_id": call["id"]}
                )
        msgs.append(self.message("assistant"))
        return msgs

    # ----------------------------------------------------------------- whole stores
    def sessions(self) -> Iterator[tuple[dict, list[dict]]]:
        rng = self.rng
        n_sessions = max(1, self.n_messages // 10)
        remaining = self.n_messages
        t = BASE_TIME
        prev_id = None
        for i in range(n_sessions):
            left_sessions = n_sessions - i
            if i == 0 and self.long_session:
                budget = self.long_session
            elif left_sessions == 1:
                budget = remaining
            else:
                mean = (remaining - 0) / left_sessions
                budget = max(1, min(remaining - (left_sessions - 1), int(rng.uniform(0.3, 1.7) * mean)))
            remaining -= budget
            sid = f"bench_{i:07d}"
            source = rng.choices(self._source_names, weights=self._source_weights)[0]
            # every 20th session continues the previous one after a compression split
            parent = prev_id if (i % 20 == 19 and prev_id) else None
            started = t
            msgs: list[dict] = []
            while len(msgs) < budget:
                msgs.extend(self.turn())
            msgs = msgs[:budget]
            for m in msgs:
                t += 7.0
                m["timestamp"] = t
                if m["role"] == "assistant":
                    m["token_count"] = rng.randint(20, 900)
            tool_calls = sum(len(m.get("tool_calls") or ()) for m in msgs)
            session = {
                "id": sid,
                "source": source,
                "user_id": f"user{rng.randint(1, 50)}" if source != "cli" else None,
                "model": rng.choice(("gpt-5", "claude-sonnet-4", "hermes-4-405b")),
                "parent_session_id": parent,
                "started_at": started,
                "ended_at": t + 1.0,
                "end_reason": "compression" if i % 20 == 18 else "user_exit",
                "message_count": len(msgs),
                "tool_call_count": tool_calls,
                "input_tokens": rng.randint(100, 90_000),
                "output_tokens": rng.randint(100, 20_000),
                "title": f"Bench session {i}" if i % 3 == 0 else None,
                "cwd": f"/home/dev/{rng.choice(self.vocab.words[:40])}",
                "last_activity_at": t,
            }
            prev_id = sid
            t += 60.0
            yield session, msgs
