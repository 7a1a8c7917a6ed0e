"""The second search corpus (issue 32): an operations team's conversations, in another
shape than ``_workload``'s, written through the public API.

``_workload`` was the corpus the PostgreSQL search was tuned on: rare planted terms
(≤ 1 % of messages), 5 % Chinese messages, short tool outputs. This one differs where
the cost of a search lies:

    docker                ~12 % of messages (one in eight)             (word)
    kube*                 ~9 % (kubectl, kubernetes, kubelet, …)       (prefix)
    nginx / grafana       ~4 % / ~2.5 %                                 (boolean)
    "docker compose"      ~2 %                                         (phrase)
    kube-proxy            ~0.7 %                                       (hyphenated)
    数据库                 ~1.5 % of messages                           (CJK, trigram)
    日志                   ~2 % of messages: rare among the Chinese      (CJK, 2 characters)
                          messages (30 % of the prose), whose words
                          hold 日 and 志 apart (日期, 今日, 标志…)
    tool outputs          log dumps of 1.5–17 kB (most messages' text), a quarter of the rows

and the words around them follow a steeper Zipf law over a real ops vocabulary mixed
with pseudo-words. Every message goes in through ``SessionDB.create_session`` /
``append_messages`` / ``end_session`` in one seeded order, so a SQLite file and a
PostgreSQL database built from it hold the same rows under the same ids, written the
way the agent writes them (each engine's triggers and indexes fed row by row; on
PostgreSQL the GIN indexes' pending lists as the writes left them).

``QUERIES`` are the benchmark's nine kinds on this corpus.
"""

from __future__ import annotations

import json
import random
from typing import Iterator

#: bump when the generated text changes, so the cached SQLite file is rebuilt
CORPUS_VERSION = 1

QUERIES = (
    ("word", "docker", {}),
    ("phrase", '"docker compose"', {}),
    ("prefix", "kube*", {}),
    ("boolean", "nginx OR grafana NOT docker", {}),
    ("hyphenated", "kube-proxy", {}),
    ("CJK trigram", "数据库", {}),
    ("CJK too short", "日志", {}),
    ("word + filters", "docker", {"source_filter": ["telegram", "discord"],
                                  "role_filter": ["user", "assistant"]}),
    ("word, newest first", "docker", {"sort": "newest"}),
)

BASE_TIME = 1_760_000_000.0
SOURCES = (("cli", 40), ("telegram", 25), ("discord", 15), ("cron", 10), ("slack", 10))
TOOLS = ("terminal", "read_file", "search_files", "web_search", "patch", "process")

_ENGLISH = """
the a to is it of and in for on this that with you can be we not are if as check run
now should but error need will let from see file service pod container image build
config log logs server port node cluster deploy restart status version update fix
issue test output running failed found using command path memory disk network volume
secret namespace health probe timeout request response upstream backend proxy cache
metrics alert dashboard query database table index backup restore replica primary
job cron schedule retry queue worker thread process signal exit code stack trace
""".split()
_KUBE = ("kubectl", "kubernetes", "kubelet", "kubeadm", "kubeconfig", "kube-system",
         "kube-proxy")
_CJK_WORDS = """
服务 配置 部署 容器 镜像 集群 节点 网络 端口 问题 错误 重启 检查 更新 版本 文件 目录 权限
用户 请求 响应 超时 内存 磁盘 监控 告警 数据 查询 备份 恢复 任务 进程 线程 命令 脚本 环境
变量 证书 域名 负载 均衡 缓存 队列 消息 接口 测试 发布 回滚 日期 今日 昨日 标志 意志 同志
杂志 每日 工作日 生日 我们 你们 这个 那个 已经 可以 需要 应该 因为 所以 但是 如果 然后 现在
一下 看看 好像 还是 没有 不是 什么 怎么 为什么 成功 失败 正常 异常 完成 开始 结束 运行 停止
""".split()
_SYLLABLES = "ka ti ro me su la ne po vi da re mo lu sa te ni ko ba fe gi ha ju li ma".split()


def _zipf_weights(n: int, exponent: float) -> list[float]:
    total, cum = 0.0, []
    for rank in range(1, n + 1):
        total += 1.0 / rank ** exponent
        cum.append(total)
    return cum


class OpsCorpus:
    """Streams (session arguments, [append_messages dicts]) for ``n_messages``."""

    def __init__(self, n_messages: int, *, seed: int = 32):
        self.n_messages = n_messages
        rng = self.rng = random.Random(seed * 104729 + n_messages)
        pseudo = sorted({"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))
                         for _ in range(1200)})
        self.words = list(dict.fromkeys(_ENGLISH + pseudo))
        rng.shuffle(self.words)
        self.cum = _zipf_weights(len(self.words), 1.2)
        self.cjk_cum = _zipf_weights(len(_CJK_WORDS), 0.9)
        self.log_lines = [self._log_line() for _ in range(4000)]
        self._call_seq = 0

    # ----------------------------------------------------------------- text
    def _latin(self, k: int) -> str:
        return " ".join(self.rng.choices(self.words, cum_weights=self.cum, k=k))

    def _log_line(self) -> str:
        rng = self.rng
        level = rng.choice(("INFO", "INFO", "DEBUG", "WARN", "ERROR"))
        return (f"2025-10-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
                f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z {level} "
                f"[{self._latin(1)}] {self._latin(rng.randint(4, 10))}")

    def _ops_terms(self, text: list[str], scale: float) -> None:
        """Insert the measured terms into a list of words, each with its frequency."""
        rng = self.rng
        for term, p in (("docker", 0.07), ("docker compose", 0.02), ("nginx", 0.035),
                        ("grafana", 0.025), ("kube-proxy", 0.006)):
            if rng.random() < p * scale:
                text.insert(rng.randrange(len(text) + 1), term)
        if rng.random() < 0.06 * scale:
            text.insert(rng.randrange(len(text) + 1), rng.choice(_KUBE[:6]))

    def _prose(self, lo: int, hi: int) -> str:
        rng = self.rng
        if rng.random() < 0.30:
            words = rng.choices(_CJK_WORDS, cum_weights=self.cjk_cum, k=rng.randint(12, 60))
            if rng.random() < 0.065:
                words.insert(rng.randrange(len(words) + 1), "数据库")
            if rng.random() < 0.075:
                words.insert(rng.randrange(len(words) + 1), "日志")
            chunks = ["".join(words[i:i + 7]) + "，" for i in range(0, len(words), 7)]
            self._ops_terms(chunks, 1.0)
            return " ".join(chunks).rstrip("，") + "。"
        sentences = []
        for _ in range(rng.randint(lo, hi)):
            words = self._latin(rng.randint(6, 18)).split()
            self._ops_terms(words, 0.5)
            sentences.append(" ".join(words).capitalize() + ".")
        return " ".join(sentences)

    def _tool_output(self, name: str) -> str:
        rng = self.rng
        if name in ("web_search", "patch"):
            lines = rng.choices(self.log_lines, k=rng.randint(2, 8))
        else:
            lines = rng.choices(self.log_lines, k=rng.randint(20, 230))
        lines = list(lines)
        for term, p in (("docker", 0.12), ("nginx", 0.03), ("grafana", 0.02),
                        ("kube-proxy", 0.008)):
            if rng.random() < p:
                for _ in range(rng.randint(1, 6)):
                    at = rng.randrange(len(lines))
                    lines[at] = f"{lines[at]} {term}"
        if rng.random() < 0.09:
            at = rng.randrange(len(lines))
            lines[at] += " " + rng.choice(_KUBE)
        if rng.random() < 0.01:
            lines.insert(rng.randrange(len(lines) + 1), "错误日志已写入 /var/log/app.log")
        return "\n".join(lines)

    def _tool_calls(self, n: int) -> list[dict]:
        rng = self.rng
        calls = []
        for _ in range(n):
            self._call_seq += 1
            name = rng.choice(TOOLS)
            command = self._latin(3)
            r = rng.random()
            if r < 0.06:
                command = f"docker ps {command}"
            elif r < 0.10:
                command = f"kubectl get pods -n kube-system {command}"
            calls.append({"id": f"call_{self._call_seq:08x}", "type": "function",
                          "function": {"name": name,
                                       "arguments": json.dumps({"command": command})}})
        return calls

    def _turn(self) -> list[dict]:
        rng = self.rng
        msgs = [{"role": "user", "content": self._prose(1, 3)}]
        if rng.random() < 0.45:
            calls = self._tool_calls(rng.randint(1, 3))
            msgs.append({"role": "assistant", "content": self._prose(1, 2),
                         "tool_calls": calls, "finish_reason": "tool_calls"})
            for call in calls:
                name = call["function"]["name"]
                msgs.append({"role": "tool", "content": self._tool_output(name),
                             "tool_name": name, "tool_call_id": call["id"]})
        msgs.append({"role": "assistant", "content": self._prose(2, 6),
                     "finish_reason": "stop", "token_count": rng.randint(30, 1200)})
        return msgs

    # ----------------------------------------------------------------- sessions
    def sessions(self) -> Iterator[tuple[dict, list[dict]]]:
        """(``create_session`` keyword arguments with ``session_id``, the messages)."""
        rng = self.rng
        n_sessions = max(1, self.n_messages // 10)
        remaining, t = self.n_messages, BASE_TIME
        for i in range(n_sessions):
            left = n_sessions - i
            budget = remaining if left == 1 else max(
                1, min(remaining - (left - 1), int(rng.uniform(0.2, 1.8) * remaining / left)))
            remaining -= budget
            source = rng.choices([s for s, _ in SOURCES], weights=[w for _, w in SOURCES])[0]
            msgs: list[dict] = []
            while len(msgs) < budget:
                msgs.extend(self._turn())
            msgs = msgs[:budget]
            for m in msgs:
                t += rng.uniform(2.0, 40.0)
                m["timestamp"] = t
            session = {"session_id": f"ops_{i:06d}", "source": source,
                       "model": rng.choice(("gpt-5", "claude-sonnet-4", "hermes-4-405b")),
                       "user_id": None if source == "cli" else f"op{rng.randint(1, 30)}"}
            t += 300.0
            yield session, msgs


def fill(db, n_messages: int, *, progress=None) -> dict:
    """Write the corpus into the open store ``db`` (a ``SessionDB``) through its API."""
    n_msgs = n_sessions = 0
    for session, msgs in OpsCorpus(n_messages).sessions():
        sid = session.pop("session_id")
        db.create_session(sid, session.pop("source"), **session)
        db.append_messages(sid, msgs)
        db.end_session(sid, "user_exit")
        n_msgs += len(msgs)
        n_sessions += 1
        if progress and n_sessions % 1000 == 0:
            progress(n_msgs)
    return {"messages": n_msgs, "sessions": n_sessions}
