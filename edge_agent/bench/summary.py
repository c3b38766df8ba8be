"""The figures of each part that go into `edge-agent bench`'s one table (`SummaryRow`s), and the
table itself with the machine it ran on."""

from __future__ import annotations

from typing import Any

from edge_agent.bench.document import BenchDocument, SummaryRow
from edge_agent.bench.latency_figures import STAGES
from edge_agent.bench.stats import summarize


def spread(figure: str, unit: str, stats: dict[str, Any], note: str = "") -> SummaryRow:
    """A row from `stats.summarize`'s figures (p50, p95 of n samples)."""
    return {"figure": figure, "unit": unit, "n": stats["n"], "p50": stats.get("p50"),
            "p95": stats.get("p95"), "value": None, "note": note}


def single(figure: str, unit: str, value: float, n: int, note: str = "") -> SummaryRow:
    """A row with one figure (a rate, a count)."""
    return {"figure": figure, "unit": unit, "n": n, "p50": None, "p95": None, "value": value,
            "note": note}


def engines_rows(result: dict[str, Any]) -> list[SummaryRow]:
    load = result["load_s"]
    rows = [single("voice, recognizer and VAD loaded", "s", load["voice_recognizer_vad"], 1),
            spread(f"voice real-time factor ({result['tts']['engine']})", "RTF",
                   result["tts"]["rtf"]),
            spread(f"recognizer real-time factor ({result['stt']['engine']}, clean)", "RTF",
                   result["stt"]["rtf"])]
    llm = result["llm"]
    if llm is not None:
        rows += [single("LLM loaded", "s", load["llm"], 1),
                 spread("LLM first token (a short question)", "ms", llm["first_token_ms"]),
                 spread("LLM decoding speed", "tokens/s", llm["tokens_per_s"])]
        rows += [spread(f"LLM decoding beside {' + '.join(together['beside'])} at work",
                        "tokens/s", together["tokens_per_s"],
                        f"{together['share_of_alone']:.0%} of alone")
                 for together in result["together"]]
    return rows


def latency_rows(result: dict[str, Any]) -> list[SummaryRow]:
    stages = result["stages_ms"]
    backchannels, interruptions = result["backchannels"], result["interruptions"]
    return [
        spread("voice to voice: caller's last sample -> agent's first", "ms",
               result["answer_gap_ms"], f"LLM {result['llm']}"),
        *(spread(f"  speech end (as heard) -> {stage.replace('_', ' ')}", "ms", stages[stage])
          for stage in STAGES if stage in stages),
        spread("barge-in: interruption onset -> playback stopped", "ms", result["stop_ms"]),
        spread("barge-in: interruption onset -> confirmed", "ms",
               result["barge_in_confirmed_ms"]),
        single("false interruptions on backchannels", "", backchannels["false_interruptions"],
               backchannels["count"], f"of {backchannels['count']}"),
        single("interruptions missed", "", interruptions["missed"], interruptions["count"],
               f"of {interruptions['count']}"),
        single("WER of the caller's lines through the microphone", "%",
               result["user_turns_wer_percent"], len(result["user_turns"]))]


def heard_rows(result: dict[str, Any]) -> list[SummaryRow]:
    trials = result["trials"]
    exact = result["summary"]["heard_words_exact"]
    return [spread("heard position error |estimate - recorded|", "ms",
                   summarize([abs(t["error_ms"]) for t in trials], 2), "target p95 <= 25 ms"),
            spread("stop: barge-in request -> last sample out", "ms",
                   summarize([t["stop_ms"] for t in trials], 2)),
            single("heard words exact", "%", exact["percent"], len(trials),
                   f"{exact['count']} of {len(trials)}")]


def stt_rows(result: dict[str, Any]) -> list[SummaryRow]:
    rows: list[SummaryRow] = []
    for engine, figures in result["engines"].items():
        rows += [single(f"recognizer WER ({engine}, clip set)", "%", figures["wer_percent"],
                        result["clips"], f"clean {figures['by_condition'].get('clean', '-')} %"),
                 spread(f"recognizer real-time factor ({engine}, clip set)", "RTF",
                        figures["rtf"]),
                 spread(f"recognizer wait after the last audio ({engine})", "ms",
                        figures["end_ms"])]
    return rows


def backchannel_rows(result: dict[str, Any]) -> list[SummaryRow]:
    total = result["summary"]
    rows = [single("backchannel classifier accuracy (spoken)", "%", total["accuracy_percent"],
                   total["clips"], f"{total['correct']} of {total['clips']}")]
    english = result["by_language"].get("en")
    if english is not None:
        rows.append(single("  English clips", "%", english["accuracy_percent"], english["clips"],
                           f"{english['correct']} of {english['clips']}"))
    rows += [single("  false interruptions", "", total["false_interruptions"],
                    total["backchannels"], f"of {total['backchannels']} backchannels"),
             single("  missed interruptions", "", total["missed_interruptions"],
                    total["interruptions"], f"of {total['interruptions']} interruptions")]
    return rows


def memory_rows(result: dict[str, Any]) -> list[SummaryRow]:
    first, last = result["measured_turns"][0], result["measured_turns"][-1]
    assembly, samples = result["assembly_ms"], result["first_token_samples_ms"]["stepped"]
    rows = [spread(f"prompt assembly, turn {turn}", "ms", assembly[str(turn)])
            for turn in (first, last)]
    rows += [spread(f"first token, turn {turn} (window in steps)", "ms",
                    summarize(samples[str(turn)]))
             for turn in (first, last)]
    rows.append(spread("commit of a turn (synchronous=FULL)", "ms", result["commit_turn_ms"]))
    if result["restart"] is not None:
        restart = result["restart"]
        rows += [spread("first token after a restart, cold", "ms",
                        restart["cold"]["first_token_ms"]),
                 spread("first token after a restart, saved state", "ms",
                        restart["restored"]["first_token_ms"])]
    durability = result["durability"]
    if durability["kills"]:
        rows.append(single("turns lost to SIGKILLs", "", durability["turns_lost"],
                           durability["kills"], f"{durability['kills']} kills"))
    return rows


def service_rows(result: dict[str, Any]) -> list[SummaryRow]:
    figures = result["figures"]
    rows = [single("service: start to READY", "s", figures["ready_s"], 1),
            spread("idle CPU, % of one core (per second)", "%",
                   summarize(figures["idle_cpu_samples"], 2),
                   f"{figures['idle_cpu_percent']} % over {figures['idle_s']:.0f} s"),
            single("idle RSS", "MB", figures["idle_rss_mb"], 1,
                   f"PSS {figures['idle_pss_mb']:.0f} MB"),
            single("peak RSS (VmHWM, after answering)", "MB", figures["peak_rss_mb"], 1),
            single("a question: words end -> agent speaking", "s", figures["answered_s"], 1)]
    if figures["mic_recover_s"] is not None:
        rows += [single("microphone back -> listening", "s", figures["mic_recover_s"], 1),
                 single("speaker back -> listening", "s", figures["speaker_recover_s"], 1)]
    return rows


def rooms_rows(result: dict[str, Any]) -> list[SummaryRow]:
    """The canceller, interruptions and listening in the simulated room, with the issue's
    targets in the notes."""
    canceller = result["canceller"]
    rows: list[SummaryRow] = []
    for erle in canceller["erle"]:
        seconds = len(erle["per_second_db"])
        rows += [single(f"ERLE, first second (echo {erle['echo_gain']})", "dB",
                        erle["first_second_db"], 1),
                 single(f"ERLE, steady after 2 s (echo {erle['echo_gain']})", "dB",
                        erle["steady_db"], seconds - 2, "target >= 30 dB")]
    for call in result["interruptions"]:
        over = [line for line in call["lines"] if line["kind"] == "interruption"]
        rows.append(single(f"caller WER in double talk (echo {call['echo_gain']})", "%",
                           call["double_talk_wer_percent"], len(over)))
        for when in ("first_reply", "later_replies"):
            barge_ins = call[when]
            if not barge_ins["count"]:
                continue
            label = when.replace("_", " ")
            loud = call["echo_gain"] >= 1.0  # the targets are set at echo 1.0
            rows += [single(f"  interruptions taken, {label} (echo {call['echo_gain']})", "%",
                            round(100 * barge_ins["taken"] / barge_ins["count"], 1),
                            barge_ins["count"], f"{barge_ins['taken']} of {barge_ins['count']}"
                            + ("; target 100 %" if loud else "")),
                     spread(f"  onset -> playback stopped, {label} (echo {call['echo_gain']})",
                            "ms", barge_ins["stop_ms"], "; ".join(
                                (["target <= 250 ms"] if loud else [])
                                + ([f"{barge_ins['already_paused']} paused on its own echo "
                                    "before"] if barge_ins["already_paused"] else [])))]
    own = result["self_interruptions"]
    replies = own["replies"]
    rows.append(single(f"self-interruptions per 100 replies (echo {own['echo_gain']})", "",
                       round(100 * own["barge_ins"] / replies, 1) if replies else 0.0, replies,
                       f"{own['barge_ins']} in {replies} replies, {own['pauses']} pauses; "
                       "target 0"))
    rows += [single(f"caller WER, {scenario['scenario']}", "%", scenario["wer_percent"],
                    len(scenario["lines"]))
             for scenario in result["listening"]]
    rows += [single(f"CPU of {cpu['processing']}", "% core", cpu["percent_of_core"], 1,
                    f"{cpu['cpu_s']} s for {cpu['audio_s']:.0f} s of audio; target <= 10 %")
             for cpu in canceller["cpu"]]
    lag = canceller["lag"]
    rows.append(single("latency added by the processing", "ms", lag["ms"], 1,
                       f"{lag['framing_ms']:g} ms framing + filters, measured"))
    return rows + array_rows(result["arrays"])


ARRAY_TARGETS = {("4-mic respeaker-4mic-hat", 2, -10.0): "target <= 12 %",
                 ("4-mic respeaker-4mic-hat", 2, -5.0): "target <= 20 %"}
"""The issue's targets for the 4-mic array in the café."""


def array_rows(arrays: dict[str, Any]) -> list[SummaryRow]:
    """Each microphone setup in the café: WER per scenario, interruptions, the beamformer's
    cost."""
    rows = [single(f"café WER, {entry['scenario']}: {entry['setup']}", "%",
                   entry["wer_percent"], len(entry["lines"]), _by_start(entry))
            for entry in arrays["listening"]]
    for over in arrays["interruptions"]:
        rows += [single(f"café interruptions taken (echo {over['echo_gain']}): {over['setup']}",
                        "%", round(100 * over["taken"] / over["count"], 1) if over["count"]
                        else 0.0, over["count"],
                        f"{over['taken']} of {over['count']}; target 100 %"),
                 spread(f"  onset -> playback stopped: {over['setup']}", "ms", over["stop_ms"],
                        "")]
    for cost in arrays["beamformers"]:
        rows += [single(f"CPU of the {cost['beamformer']} beamformer: {cost['setup']}",
                        "% core", cost["percent_of_core"], 1,
                        f"{cost['cpu_s']} s for {cost['audio_s']:.0f} s of audio; "
                        "target <= 15 %"),
                 single(f"latency added by the beamformer: {cost['setup']}", "ms",
                        cost["added_latency_ms"], 1, "measured; target <= 20 ms")]
    return rows


def _by_start(entry: dict[str, Any]) -> str:
    """The target of a café cell, and its runs' WER where the talkers began at several
    moments."""
    notes = [ARRAY_TARGETS.get((entry["setup"], entry["talkers"], entry["talkers_db"]), "")]
    if len(entry["wer_by_start_percent"]) > 1:
        notes.append("runs " + " / ".join(f"{w:g}" for w in entry["wer_by_start_percent"])
                     + " %")
    return "; ".join(n for n in notes if n)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.3f}" if abs(value) < 1 else f"{value:.1f}"


def _model_name(name: str, engine: str) -> str:
    return f" ({name})" if name and engine != "scripted" else ""


def machine_lines(document: BenchDocument) -> list[str]:
    machine = document["machine"]
    models = ", ".join(f"{m['kind']} {m['engine']}" + _model_name(m["name"], m["engine"])
                       for m in document["models"])
    return [f"edge-agent {machine['edge_agent']} bench{' --quick' if document['quick'] else ''}, "
            f"{machine['date']}, {document['seconds']:.0f} s",
            f"machine: {machine['cpu_model']}, {machine['cpu_cores']} cores, "
            f"{machine['ram_total_mb'] / 1024:.1f} GB RAM; {machine['os']}, kernel "
            f"{machine['kernel']} ({machine['arch']}); Python {machine['python']}; load "
            f"{' '.join(map(str, machine['load_before']))} before, "
            f"{' '.join(map(str, machine['load_after']))} after",
            f"models: {models}"]


def table(document: BenchDocument) -> str:
    """The one table: every part's figures (p50 / p95 over n, or one value), skipped and failed
    parts with their reason."""
    lines = [*machine_lines(document), "",
             f"{'part':12}{'figure':56}{'p50':>9}{'p95':>9}{'n':>5}  unit"]
    for part in document["parts"]:
        if part["status"] != "ok":
            lines.append(f"{part['name']:12}{part['status'].upper()}: {part['reason']}")
            continue
        for row in part["rows"]:
            first = row["p50"] if row["value"] is None else row["value"]
            note = f"  ({row['note']})" if row["note"] else ""
            lines.append(f"{part['name']:12}{row['figure']:56}{_number(first):>9}"
                         f"{_number(row['p95']):>9}{row['n']:>5}  {row['unit']}{note}")
    return "\n".join(lines)
