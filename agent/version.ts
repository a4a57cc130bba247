/** The version this agent reports in its inventory. */
export const AGENT_VERSION = '0.1.0';
