// The kiosk's screen: connects to the agent (/live), shows each snapshot it sends, and sends
// the stop button. Every text goes in with textContent: a caller's words or a model's reply
// are never markup. The token, if any, comes after "#token=" (never sent in a request line).
//
// Lines are kept by id and only what changed is touched: a reply lighting up word by word
// changes two text nodes, not the page. A screen reader hears each line once, when it is done
// (the caller's turn; the agent's unit, played out or cut), from a separate live region, not
// every word as it lights up.
//
// With push-to-talk, the Talk button is held with a finger, the mouse or the space bar; the
// agent hears the microphone only while it is held, and letting go ends the turn.
"use strict";

const STATES = {
  starting: "Starting…",
  refused: "This screen's token was refused",
  waiting: "Waiting",
  listening: "Listening",
  thinking: "Thinking…",
  speaking: "Speaking",
};
const WHO = { caller: "You", backchannel: "You (mm-hm)", agent: "Agent" };
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
const shown = new Map(); // line id -> its <li>
let socket = null;
let retry = 250;
let talking = false;

function setState(state, callerSpeaking) {
  document.body.dataset.state = state;
  const label = callerSpeaking && state !== "speaking" ? "Listening to you…" : STATES[state];
  const status = document.getElementById("state");
  if (status.textContent !== label) status.textContent = label;
  document.getElementById("stop").hidden = state !== "speaking";
}

function span(className, text) {
  const element = document.createElement("span");
  element.className = className;
  element.textContent = text;
  return element;
}

function announce(text) {
  const region = document.getElementById("announce");
  region.append(span("", text));
  while (region.childElementCount > 4) region.firstElementChild.remove();
}

function created(item) {
  const element = document.createElement("li");
  element.dataset.who = item.who;
  element.dataset.id = item.id;
  const text = span("text", "");
  text.dir = "auto";
  element.append(span("who", WHO[item.who]), text);
  if (item.who === "agent") {
    text.append(span("heard", ""), span("rest", ""));
    element.append(span("sr-only note", ""));
  } else {
    text.textContent = item.text;
    announce(`${WHO[item.who]}: ${item.text}`);
  }
  return element;
}

function setText(element, text) {
  if (element.textContent !== text) element.textContent = text;
}

function update(element, item) {
  if (item.who !== "agent") return;
  setText(element.querySelector(".heard"), item.heard);
  setText(element.querySelector(".rest"), item.rest);
  setText(element.querySelector(".note"), item.said === "cut" && item.rest ? " (not said)" : "");
  if (element.dataset.said !== item.said) {
    element.dataset.said = item.said;
    if (item.said === "done") announce(`Agent: ${item.heard}`);
    if (item.said === "cut") announce(`Agent, cut short: ${item.heard}`);
  }
}

function showPartial(words) {
  const partial = document.getElementById("partial");
  setText(partial, words || "");
  partial.hidden = !words;
}

function show(snapshot) {
  setState(snapshot.state, snapshot.caller_speaking);
  document.getElementById("talk").hidden = !snapshot.push_to_talk;
  showPartial(snapshot.caller_words);
  const list = document.getElementById("lines");
  const wanted = new Set(snapshot.lines.map((item) => item.id));
  for (const [id, element] of shown) {
    if (!wanted.has(id)) {
      element.remove();
      shown.delete(id);
    }
  }
  snapshot.lines.forEach((item, index) => {
    let element = shown.get(item.id);
    if (!element) {
      element = created(item);
      shown.set(item.id, element);
    }
    update(element, item);
    const there = list.children[index] || null;
    if (there !== element) list.insertBefore(element, there); // only a line out of place moves
  });
  const main = document.querySelector("main");
  main.scrollTop = main.scrollHeight;
}

function clear() {
  shown.clear();
  document.getElementById("lines").replaceChildren();
  document.getElementById("announce").replaceChildren();
  showPartial("");
  setTalking(false);
  document.getElementById("talk").hidden = true;
}

function send(message) {
  if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
}

function setTalking(held) {
  if (talking === held) return;
  talking = held;
  document.getElementById("talk").setAttribute("aria-pressed", String(held));
  send({ type: "talk", held });
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  socket = new WebSocket(`${scheme}//${location.host}/live`);
  socket.onopen = () => {
    retry = 250;
    socket.send(JSON.stringify({ type: "hello", token }));
  };
  socket.onmessage = (message) => show(JSON.parse(message.data));
  socket.onclose = (closed) => {
    clear(); // nothing stays up unconnected
    if (closed.code === 4401) {
      setState("refused", false);
      return;
    }
    setState("starting", false);
    setTimeout(connect, retry);
    retry = Math.min(retry * 2, 4000);
  };
}

document.getElementById("stop").addEventListener("click", () => send({ type: "stop" }));
const talk = document.getElementById("talk");
talk.addEventListener("pointerdown", (event) => {
  talk.setPointerCapture(event.pointerId); // the finger may slide off and still hold it
  setTalking(true);
});
for (const name of ["pointerup", "pointercancel", "lostpointercapture"]) {
  talk.addEventListener(name, () => setTalking(false));
}
talk.addEventListener("contextmenu", (event) => event.preventDefault());
talk.addEventListener("keydown", (event) => {
  if ((event.key === " " || event.key === "Enter") && !event.repeat) {
    event.preventDefault();
    setTalking(true);
  }
});
talk.addEventListener("keyup", (event) => {
  if (event.key === " " || event.key === "Enter") setTalking(false);
});
talk.addEventListener("blur", () => setTalking(false));
connect();
