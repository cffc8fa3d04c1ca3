// Input-bound levels, by the TensorFlow profiler's convention that the server's
// diagnosis follows: highly input-bound from 20 % of step time spent waiting
// for input, moderately from 5 %. The server does not send these yet (neither
// `/diagnosis` nor the run summary carries them); until it does, this module
// is their one place in the UI.

export const HIGHLY_INPUT_BOUND = 0.2;
export const MODERATELY_INPUT_BOUND = 0.05;
