// The kiosk's screen: connects to the agent (/live), shows each snapshot it sends, and sends
// the stop button. Every text goes in with textContent: a caller's words or a model's reply
// are never markup. The token, if any, comes after "#token=" (never sent in a request line).
"use strict";

const STATES = {
  starting: "Starting…",
  refused: "This screen's token was refused",
  waiting: "Waiting",
  listening: "Listening",
  thinking: "Thinking…",
  speaking: "Speaking",
};
const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
let socket = null;
let retry = 250;

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

function line(item) {
  const element = document.createElement("li");
  element.dataset.who = item.who;
  element.dataset.id = item.id;
  const who = { caller: "You", backchannel: "You (mm-hm)", agent: "Agent" }[item.who];
  const text = span("text", item.who === "agent" ? "" : item.text);
  text.dir = "auto";
  element.append(span("who", who), text);
  if (item.who === "agent") {
    element.dataset.said = item.said;
    text.append(span("heard", item.heard), span("rest", item.rest));
    if (item.said === "cut" && item.rest) element.append(span("sr-only", " (not said)"));
  }
  return element;
}

function show(snapshot) {
  setState(snapshot.state, snapshot.caller_speaking);
  const list = document.getElementById("lines");
  list.replaceChildren(...snapshot.lines.map(line));
  const main = document.querySelector("main");
  main.scrollTop = main.scrollHeight;
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
    document.getElementById("lines").replaceChildren();  // nothing stays up unconnected
    if (closed.code === 4401) {
      setState("refused", false);
      return;
    }
    setState("starting", false);
    setTimeout(connect, retry);
    retry = Math.min(retry * 2, 4000);
  };
}

document.getElementById("stop").addEventListener("click", () => {
  if (socket && socket.readyState === WebSocket.OPEN) {
    socket.send(JSON.stringify({ type: "stop" }));
  }
});
connect();
