"""The house: the MQTT broker that Home Assistant, Node-RED and openHAB speak, the agent's
state published there, and the config's tools that publish to it."""
