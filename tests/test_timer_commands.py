"""Timer commands read by rules from what the recognizer writes (digits or words, with its
punctuation), done on a real SQLite file and said back from what the file holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from edge_agent.timers.commands import TimerCommand, duration_only, parse
from edge_agent.timers.desk import TimerDesk
from edge_agent.timers.spoken import ClockTime, next_at, say_clock, say_duration, say_left
from edge_agent.timers.store import TimerStore

ZONE = ZoneInfo("Europe/Amsterdam")
NOW = datetime(2026, 12, 6, 14, 0, tzinfo=ZONE)  # a Sunday, 2 PM


@pytest.mark.parametrize(("said", "seconds", "label"), [
    ("Set a timer for ten minutes.", 600, ""),
    ("Set a timer for 10 minutes.", 600, ""),
    ("Set a pasta timer for 8 minutes.", 480, "pasta"),
    ("a 10 minute timer for the eggs", 600, "eggs"),
    ("Set a 5-minute timer called tea.", 300, "tea"),
    ("I need a timer for the pasta for 10 minutes", 600, "pasta"),
    ("Timer for an hour and a half", 5400, ""),
    ("Set a timer for half an hour.", 1800, ""),
    ("Set a timer for a quarter of an hour.", 900, ""),
    ("Set a timer for one hour and 20 minutes.", 4800, ""),
    ("Set a timer for two and a half minutes.", 150, ""),
    ("Set a timer for ninety seconds.", 90, ""),
    ("Set a timer for twenty-five minutes.", 1500, ""),
    ("Set a timer for one hundred twenty seconds.", 120, ""),
    ("Okay, Nabu, set a timer for five seconds.", 5, ""),
    ("Set a timer for 1.5 hours.", 5400, ""),
])
def test_timers_are_set_by_their_length_as_people_say_it(said: str, seconds: float,
                                                         label: str) -> None:
    assert parse(said) == TimerCommand("set", "timer", label, seconds=seconds)


@pytest.mark.parametrize(("said", "at", "tomorrow"), [
    ("Set an alarm for 7 a.m.", ClockTime(7, 0, "am"), False),
    ("Set an alarm for 7am.", ClockTime(7, 0, "am"), False),
    ("Set the alarm for seven thirty PM.", ClockTime(7, 30, "pm"), False),
    ("Wake me up at half past six tomorrow.", ClockTime(6, 30, ""), True),
    ("Set an alarm for quarter to eight.", ClockTime(7, 45, ""), False),
    ("Set an alarm for 6 in the morning.", ClockTime(6, 0, "am"), False),
    ("Set an alarm for 18:45.", ClockTime(18, 45, ""), False),
    ("Set an alarm for seven oh five.", ClockTime(7, 5, ""), False),
    ("Set an alarm for noon.", ClockTime(12, 0, "pm"), False),
    ("Wake me at 6 o'clock.", ClockTime(6, 0, ""), False),
])
def test_alarms_are_set_by_the_time_of_day(said: str, at: ClockTime, tomorrow: bool) -> None:
    assert parse(said) == TimerCommand("set", "alarm", at=at, tomorrow=tomorrow)


@pytest.mark.parametrize(("said", "command"), [
    ("Set an alarm for 10 minutes.", TimerCommand("set", "alarm", seconds=600)),
    ("Remind me to call Anna in 20 minutes.",
     TimerCommand("set", "reminder", "call anna", seconds=1200)),
    ("Remind me at 5 PM to take the bread out.",
     TimerCommand("set", "reminder", "take the bread out", at=ClockTime(5, 0, "pm"))),
    ("Remind me in an hour that the car needs gas.",
     TimerCommand("set", "reminder", "the car needs gas", seconds=3600)),
    ("Remind me to water the plants.", TimerCommand("ask", "reminder", "water the plants")),
    ("What timers are running?", TimerCommand("list", "timer")),
    ("Do I have any alarms?", TimerCommand("list", "alarm")),
    ("List my reminders.", TimerCommand("list", "reminder")),
    ("How long is left on the pasta timer?", TimerCommand("left", "timer", "pasta")),
    ("How much time is left?", TimerCommand("left")),
    ("Cancel the pasta timer.", TimerCommand("cancel", "timer", "pasta")),
    ("Delete all alarms.", TimerCommand("cancel", "alarm", every=True)),
    ("Turn off my alarm.", TimerCommand("cancel", "alarm")),
    ("Stop the pasta timer.", TimerCommand("cancel", "timer", "pasta")),
    ("Stop.", TimerCommand("stop")),
    ("Stop it!", TimerCommand("stop")),
    ("OK, stop the alarm.", TimerCommand("stop", "alarm")),
    ("Snooze.", TimerCommand("snooze")),
    ("Set a timer.", TimerCommand("ask", "timer")),
    ("Set an alarm.", TimerCommand("ask", "alarm")),
])
def test_the_other_commands(said: str, command: TimerCommand) -> None:
    assert parse(said) == command


@pytest.mark.parametrize("said", [
    "What's the weather like?", "Tell me about the museum.", "What time is it?",
    "How long does the tour take?", "When do you open tomorrow?", "No, stop talking about it.",
    "I want to book a table for four at seven.", "", "...",
])
def test_what_is_not_a_timer_command_is_left_to_the_model(said: str) -> None:
    assert parse(said) is None


def test_a_bare_duration_answers_for_how_long() -> None:
    assert duration_only("Ten minutes.") == 600
    assert duration_only("For 5 minutes, please.") == 300
    assert duration_only("The pasta.") is None
    assert duration_only("Ten minutes, and then call me.") is None


def test_a_time_without_its_half_of_the_day_is_the_sooner_one_and_tomorrow_is_tomorrow() -> None:
    assert next_at(ClockTime(7, 0, ""), NOW, ZONE, False) == NOW.replace(hour=19)
    assert next_at(ClockTime(7, 0, "am"), NOW, ZONE, False) == (
        NOW + timedelta(days=1)).replace(hour=7)
    assert next_at(ClockTime(3, 0, ""), NOW, ZONE, True) == (
        NOW + timedelta(days=1)).replace(hour=3)
    assert next_at(ClockTime(14, 0, ""), NOW, ZONE, False) == (
        NOW + timedelta(days=1)).replace(hour=14)  # now is not "next"


def test_an_alarm_across_the_change_to_summer_time_is_at_the_clock_time_said() -> None:
    before = datetime(2027, 3, 27, 22, 0, tzinfo=ZONE)  # the clocks go forward at 2 AM
    alarm = next_at(ClockTime(7, 0, "am"), before, ZONE, False)
    assert (alarm.hour, alarm.utcoffset()) == (7, timedelta(hours=2))
    # One hour less than the clocks say (aware datetimes in one zone subtract as wall times).
    assert alarm.astimezone(UTC) - before.astimezone(UTC) == timedelta(hours=8)


def test_durations_and_times_are_said_back_in_digits() -> None:
    assert say_duration(600) == "10 minutes"
    assert say_duration(5400) == "1 hour and 30 minutes"
    assert say_duration(3725) == "1 hour, 2 minutes and 5 seconds"
    assert say_duration(1) == "1 second"
    assert say_left(250.4) == "4 minutes and 10 seconds"
    assert say_left(3 * 3600 + 125) == "3 hours and 2 minutes"
    assert say_clock(NOW.replace(hour=7, minute=5) + timedelta(days=1), NOW, ZONE) == (
        "tomorrow at 7:05 AM")
    assert say_clock(NOW.replace(hour=12), NOW, ZONE) == "12 PM"
    assert say_clock(NOW + timedelta(days=3), NOW, ZONE) == "on Wednesday at 2 PM"


def desk(tmp_path: Path) -> TimerDesk:
    return TimerDesk(TimerStore(tmp_path / "edge-agent.db", retention_days=30), ZONE)


def say(desk: TimerDesk, text: str, at: datetime = NOW) -> str:
    command = parse(text)
    assert command is not None, text
    return desk.answer(command, at).words


def test_a_kitchen_with_several_timers(tmp_path: Path) -> None:
    kitchen = desk(tmp_path)
    assert say(kitchen, "Set a pasta timer for 8 minutes.") == "Pasta timer set for 8 minutes."
    assert say(kitchen, "Set a timer for ten minutes.") == "Timer set for 10 minutes."
    assert say(kitchen, "Set an alarm for 7 a.m.") == (
        "Alarm set for tomorrow at 7 AM, 17 hours from now.")
    assert say(kitchen, "Remind me to call Anna in 20 minutes.") == (
        "OK, I'll remind you to call anna in 20 minutes.")
    later = NOW + timedelta(seconds=110)
    assert say(kitchen, "What timers are running?", later) == (
        "You have 2 timers: the pasta timer with 6 minutes and 10 seconds left and a 10 minute "
        "timer with 8 minutes and 10 seconds left.")
    assert say(kitchen, "How long is left on the pasta timer?", later) == (
        "The pasta timer has 6 minutes and 10 seconds left.")
    assert say(kitchen, "Cancel the timer.") == (
        "You have 2 timers: the pasta timer with 8 minutes left and a 10 minute timer with 10 "
        "minutes left. Which one?")
    assert say(kitchen, "Cancel the pasta timer.") == "Cancelled the pasta timer."
    assert say(kitchen, "Cancel the pasta timer.") == "There's no pasta timer to cancel."
    assert say(kitchen, "Do I have any alarms?") == (
        "You have 1 alarm: an alarm for tomorrow at 7 AM.")
    assert say(kitchen, "List my reminders.") == (
        "You have 1 reminder: a reminder to call anna at 2:20 PM.")
    assert say(kitchen, "Set a timer for 25 hours.").startswith("I can set timers from 1 second")
    due = kitchen.store.due(NOW + timedelta(minutes=20))
    assert kitchen.ring_words(due, NOW + timedelta(minutes=20), late=False) == (
        "Your 10 minute timer is done. Reminder: call anna.")
    assert kitchen.ring_words(due, NOW + timedelta(hours=2), late=True) == (
        "While I was off, your 10 minute timer went off at 2:10 PM and a reminder came due at "
        "2:20 PM: call anna.")


def test_timers_are_on_disk_and_ended_ones_are_forgotten_after_the_retention(
        tmp_path: Path) -> None:
    kitchen = desk(tmp_path)
    say(kitchen, "Set a pasta timer for 8 minutes.")
    say(kitchen, "Set a timer for ten minutes.")
    say(kitchen, "Cancel the pasta timer.")
    kitchen.store.close()
    again = desk(tmp_path)  # another process, after a restart
    assert [(t.label, t.state, t.seconds) for t in again.store.active()] == [("", "set", 600)]
    assert again.store.forget_ended(datetime.now(UTC)) == 0  # cancelled today: kept
    assert again.store.forget_ended(datetime.now(UTC) + timedelta(days=31)) == 1


def test_thirty_at_once_is_the_most(tmp_path: Path) -> None:
    kitchen = desk(tmp_path)
    for minutes in range(1, 31):
        assert say(kitchen, f"Set a timer for {minutes} minutes.").startswith("Timer set")
    assert say(kitchen, "Set a timer for 45 minutes.") == (
        "You already have 30 timers, alarms and reminders; cancel one first.")
