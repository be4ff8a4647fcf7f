"""The book's loader, written from the chapter's definition: the independent reference for the drop-ins.

(Build a Large Language Model (From Scratch), chapter 2; tiktoken's encoding replaced by the
offline one, which a tokenizer test shows to be identical.)
"""

import torch
from torch.utils.data import DataLoader, Dataset

import tokembed


class BookGPTDatasetV1(Dataset):
    def __init__(self, txt, tokenizer, max_length, stride):
        self.input_ids = []
        self.target_ids = []
        token_ids = tokenizer.encode(txt, allowed_special={"<|endoftext|>"})
        for i in range(0, len(token_ids) - max_length, stride):
            input_chunk = token_ids[i : i + max_length]
            target_chunk = token_ids[i + 1 : i + max_length + 1]
            self.input_ids.append(torch.tensor(input_chunk))
            self.target_ids.append(torch.tensor(target_chunk))

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, idx):
        return self.input_ids[idx], self.target_ids[idx]


def book_create_dataloader_v1(
    txt, batch_size=4, max_length=256, stride=128, shuffle=True, drop_last=True, num_workers=0
):
    tokenizer = tokembed.get_tokenizer("gpt2")
    dataset = BookGPTDatasetV1(txt, tokenizer, max_length, stride)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers)
