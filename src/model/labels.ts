/** The label of a position that takes no loss (PyTorch's and Hugging Face's ignore_index). */
export const IGNORE_INDEX = -100;
